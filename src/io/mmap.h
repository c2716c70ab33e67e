/* Read-only memory maps of whole files. */
#ifndef KITE_IO_MMAP_H
#define KITE_IO_MMAP_H

#include <stddef.h>
#include "base/error.h"

typedef struct kite_mapped_file {
    const unsigned char *data; /* size bytes, read-only; NULL for an empty file */
    size_t size;               /* bytes */
} kite_mapped_file;

/* Maps path. A missing file is KITE_ERR_IO with the path and strerror in the message. */
int kite_map_file(kite_mapped_file *file, const char *path, kite_error *e);
void kite_unmap_file(kite_mapped_file *file);

/* Reads a whole (small) file into a NUL-terminated malloc'd buffer. */
int kite_read_file(const char *path, char **text, size_t *size, size_t max_size, kite_error *e);

#endif
