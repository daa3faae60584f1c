/* data_url.h - images as OpenAI's chat API carries them: `data:` URLs (RFC 2397) with
 * base64 bytes, in `image_url` content parts. messages.json exports a turn's images so and
 * imports them back; the remote engine sends them so (llama-server with --mmproj takes
 * them). */
#ifndef CHATFS_FS_DATA_URL_H
#define CHATFS_FS_DATA_URL_H

#include <stddef.h>

/* The media type an image's first bytes say (image/png, image/jpeg, image/gif, image/bmp,
 * ...; application/octet-stream for anything else). */
const char *data_url_media_type(const void *bytes, size_t len);
/* "data:TYPE;base64,..." (malloc'd), NULL when out of memory. */
char *data_url_encode(const void *bytes, size_t len);
/* The bytes of a base64 data: URL (malloc'd into *out), 0; or -1 with the reason in err
 * (not a data: URL - a path or an http URL is refused, not fetched -, not base64). */
int data_url_decode(const char *url, void **out, size_t *len, char *err, size_t errlen);

#endif
