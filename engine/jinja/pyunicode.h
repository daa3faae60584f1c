/* pyunicode.h - UTF-8 strings as Python sees them: code points, whitespace (str.split,
 * str.strip), case mappings (str.upper/lower/title/capitalize) and printability (repr).
 *
 * Python strings are sequences of code points; ours are UTF-8 bytes. Indexing, len() and
 * slicing count code points. A byte that is not part of valid UTF-8 counts as one code
 * point of its own (as Python's surrogateescape would decode it) and is copied through
 * unchanged. */
#ifndef CHATFS_JINJA_PYUNICODE_H
#define CHATFS_JINJA_PYUNICODE_H

#include <stddef.h>
#include <stdint.h>

#define PY_BAD_BYTE 0x80000000u  /* decoded invalid byte b is PY_BAD_BYTE | b */

/* decodes the code point at s[0..n) (n > 0); *adv = bytes it takes */
uint32_t u8_decode(const char *s, size_t n, size_t *adv);
/* writes cp as UTF-8 into out (4 bytes), returns the length; a PY_BAD_BYTE is its byte */
int u8_encode(uint32_t cp, char *out);
size_t u8_count(const char *s, size_t n);            /* code points */
/* byte offset of code point index i (0 <= i <= count) */
size_t u8_offset(const char *s, size_t n, size_t i);
int u8_is_ascii(const char *s, size_t n);

int py_isspace(uint32_t cp);       /* str.isspace() of one code point */
int py_islinebreak(uint32_t cp);   /* str.splitlines() boundaries */
int py_iscased(uint32_t cp);
int py_iscase_ignorable(uint32_t cp);
int py_isprintable(uint32_t cp);
/* one code point's case: lowercase (Ll, Other_Lowercase), uppercase (Lu, Other_Uppercase),
 * titlecase (Lt) - what str.islower() and str.isupper() test */
int py_islower(uint32_t cp);
int py_isupper(uint32_t cp);
int py_istitle(uint32_t cp);
int py_isalnum(uint32_t cp);   /* str.isalnum(): letters and digits of every script */
/* full case mappings: write up to 3 code points to out, return how many */
int py_upper(uint32_t cp, uint32_t out[3]);
int py_lower(uint32_t cp, uint32_t out[3]);
int py_title(uint32_t cp, uint32_t out[3]);

/* generated tables (unicode_tables.c) */
typedef struct {
    uint32_t cp;
    uint32_t to[3];
} py_case_entry;
typedef struct {
    uint32_t first, last;
} py_range;
extern const char py_unicode_version[];
extern const py_case_entry py_upper_map[], py_lower_map[], py_title_map[];
extern const int py_upper_map_n, py_lower_map_n, py_title_map_n;
extern const py_range py_cased_ranges[], py_case_ignorable_ranges[], py_printable_ranges[], py_lower_ranges[],
    py_upper_ranges[], py_titlecase_ranges[], py_alnum_ranges[];
extern const int py_cased_ranges_n, py_case_ignorable_ranges_n, py_printable_ranges_n, py_lower_ranges_n,
    py_upper_ranges_n, py_titlecase_ranges_n, py_alnum_ranges_n;

#endif
