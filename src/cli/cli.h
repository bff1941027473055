/* kbrun's subcommands (src/cli/), called from src/main.c. */
#ifndef KB_CLI_H
#define KB_CLI_H

enum { KB_EXIT_OK = 0, KB_EXIT_FAILED = 1, KB_EXIT_USAGE = 2 };

/* kbrun sim [options]: the simulator standalone until SIGINT/SIGTERM. */
int kb_cli_sim(int argc, char **argv);

#endif
