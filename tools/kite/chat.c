/* kite chat: placeholder until the verb lands (this session). */
#include <stdio.h>

int kite_cmd_chat(int argc, char **argv);
int kite_cmd_chat(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "kite: error: 'chat' is not built yet\n");
    return 1;
}
