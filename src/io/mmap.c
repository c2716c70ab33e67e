#include "io/mmap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int kite_map_file(kite_mapped_file *file, const char *path, kite_error *e) {
    memset(file, 0, sizeof *file);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return kite_fail(e, KITE_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        return kite_fail(e, KITE_ERR_IO, "cannot stat %s: %s", path, strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return kite_fail(e, KITE_ERR_IO, "%s is not a regular file", path);
    }
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int err = errno;
            close(fd);
            return kite_fail(e, KITE_ERR_IO, "cannot map %s: %s", path, strerror(err));
        }
        file->data = p;
        file->size = (size_t)st.st_size;
    }
    close(fd);
    return KITE_OK;
}

void kite_unmap_file(kite_mapped_file *file) {
    if (file && file->data) munmap((void *)file->data, file->size);
    if (file) memset(file, 0, sizeof *file);
}

int kite_read_file(const char *path, char **text, size_t *size, size_t max_size, kite_error *e) {
    *text = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return kite_fail(e, KITE_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap + 1);
    if (!buf) { fclose(f); return kite_fail(e, KITE_ERR_NOMEM, "out of memory reading %s", path); }
    for (;;) {
        if (len == cap) {
            if (cap >= max_size) {
                free(buf);
                fclose(f);
                return kite_fail(e, KITE_ERR_FORMAT, "%s is larger than %zu bytes", path, max_size);
            }
            cap *= 2;
            char *nb = realloc(buf, cap + 1);
            if (!nb) { free(buf); fclose(f); return kite_fail(e, KITE_ERR_NOMEM, "out of memory reading %s", path); }
            buf = nb;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) { free(buf); return kite_fail(e, KITE_ERR_IO, "error reading %s", path); }
    buf[len] = 0;
    *text = buf;
    if (size) *size = len;
    return KITE_OK;
}
