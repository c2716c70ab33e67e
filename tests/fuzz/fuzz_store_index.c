/* Fuzzes the model store's index reader (index.json and the per-model manifests share its entry form),
 * and the pull-name parser on the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool safe(const char *p) {
    return strcmp(p, "..") && strncmp(p, "../", 3) && !strstr(p, "/../") && p[0] != '/';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    store_index ix;
    size_t dropped;
    kite_error e;
    if (store_index_parse((const char *)data, size, &ix, &dropped, &e) == KITE_OK) {
        /* what the reader promises: sorted unique names, paths inside the folder, sizes that add up */
        for (size_t i = 0; i < ix.n; i++) {
            const kite_store_entry *en = &ix.entries[i];
            if (!en->name || !*en->name || !safe(en->path) || en->n_files == 0) abort();
            if (i && strcmp(ix.entries[i - 1].name, en->name) >= 0) abort();
            uint64_t sum = 0;
            for (size_t k = 0; k < en->n_files; k++) {
                if (!safe(en->files[k].path) || !strcmp(en->files[k].path, ".")) abort();
                size_t h = strlen(en->files[k].sha256);
                if (h != 0 && h != 64) abort();
                sum += en->files[k].size;
            }
            if (sum != en->size) abort();
        }
        /* what it writes, it reads back the same */
        char *text = store_index_dump(&ix);
        if (text) {
            store_index again;
            if (store_index_parse(text, strlen(text), &again, &dropped, &e) != KITE_OK || again.n != ix.n || dropped) abort();
            store_index_clear(&again);
            free(text);
        }
        store_index_clear(&ix);
    }
    char name[1200];
    size_t n = size < sizeof name - 1 ? size : sizeof name - 1;
    memcpy(name, data, n);
    name[n] = 0;
    store_ref ref;
    if (store_parse_name(name, &ref, &e) == KITE_OK) {
        if (ref.kind == STORE_REF_HUB && (!strchr(ref.repo, '/') || strstr(ref.file, ".."))) {
            /* ".." only inside a component name is impossible: components are checked */
            if (strstr(ref.file, "/../") || !strncmp(ref.file, "../", 3)) abort();
        }
        char dir[256];
        store_name_dir(ref.name, dir, sizeof dir);
        if (strchr(dir, '/') || dir[0] == '.' || !dir[0]) abort();
        store_ref again;
        if (store_parse_name(ref.name, &again, &e) != KITE_OK || strcmp(again.name, ref.name)) abort(); /* normal form is stable */
    }
    return 0;
}
