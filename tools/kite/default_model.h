/* The model a verb runs when no --model is given (kite_default_model_path in kite.h). */
#ifndef KITE_CLI_DEFAULT_MODEL_H
#define KITE_CLI_DEFAULT_MODEL_H

#include <stdbool.h>

/* Leaves *model alone when the user gave one; otherwise sets it to the default model and says on stderr
 * which file that is (unless quiet). Returns 0, or 2 (a usage error) after printing an error that says
 * where kite looked and to pass --model. verb names the command in the message ("kite run"). */
int kite_cli_model_or_default(const char **model, const char *verb, bool quiet);

#endif
