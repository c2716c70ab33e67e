/* The model store's verbs and the store names --model accepts (store.c). */
#ifndef KITE_CLI_STORE_H
#define KITE_CLI_STORE_H

int kite_cmd_list(int argc, char **argv);
int kite_cmd_show(int argc, char **argv);
int kite_cmd_rm(int argc, char **argv);
int kite_cmd_pull(int argc, char **argv);

/* Takes the global options --models-dir DIR and --pull out of argv (*argc shrinks), then replaces the
 * value of every --model/-m (and --draft) that is a store name by the model's path, pulling it first
 * under --pull. Returns 0, or an exit code after printing why. */
int kite_cli_resolve_models(int *argc, char **argv);

#endif
