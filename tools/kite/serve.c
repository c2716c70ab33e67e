/* kite serve: placeholder until the verb lands (this session). */
#include <stdio.h>

int kite_cmd_serve(int argc, char **argv);
int kite_cmd_serve(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "kite: error: 'serve' is not built yet\n");
    return 1;
}
