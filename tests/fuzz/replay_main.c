/* Runs a libFuzzer target over files and folders given on the command line, so the fuzz corpora
 * replay as ordinary tests under gcc and the sanitizers. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "cannot open %s\n", path); return 1; }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    if (!buf || (n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n)) { fclose(f); free(buf); return 1; }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, (size_t)n);
    free(buf);
    return 0;
}

static int run_path(const char *path, int *count) {
    struct stat st;
    if (stat(path, &st) != 0) { fprintf(stderr, "missing %s\n", path); return 1; }
    if (!S_ISDIR(st.st_mode)) { (*count)++; return run_file(path); }
    DIR *d = opendir(path);
    if (!d) return 1;
    int bad = 0;
    struct dirent *ent;
    while ((ent = readdir(d))) {
        if (ent->d_name[0] == '.') continue;
        char sub[4096];
        snprintf(sub, sizeof sub, "%s/%s", path, ent->d_name);
        bad |= run_path(sub, count);
    }
    closedir(d);
    return bad;
}

int main(int argc, char **argv) {
    int count = 0, bad = 0;
    for (int i = 1; i < argc; i++) bad |= run_path(argv[i], &count);
    printf("replayed %d inputs\n", count);
    return bad || count == 0;
}
