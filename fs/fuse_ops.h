/* fuse_ops.h - the low-level FUSE operations table over chatfs.h. */
#ifndef CHATFS_FS_FUSE_OPS_H
#define CHATFS_FS_FUSE_OPS_H

#define FUSE_USE_VERSION 34
#include <fuse_lowlevel.h>

#include "fs/chatfs.h"

typedef struct fsfuse fsfuse;

/* Wires chatfs's notifications to the parked reads and polls of the session. */
fsfuse *fsfuse_new(chatfs *fs);
void fsfuse_set_session(fsfuse *F, struct fuse_session *se);
const struct fuse_lowlevel_ops *fsfuse_ops(void);
/* Files opened through the session and not yet released. */
int fsfuse_open_files(fsfuse *F);
/* Answers every parked read (ENODEV) and drops poll handles: before the session goes. */
void fsfuse_drain(fsfuse *F);
void fsfuse_free(fsfuse *F);

#endif
