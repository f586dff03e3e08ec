/* runc's command line (what follows fakegpu-create's own "--"): finding the subcommand and options, reporting
 * an error as runc's caller reads it, handing the line to the low-level runtime. */
#ifndef FG_RUNC_ARGS_H
#define FG_RUNC_ARGS_H

extern int fg_runc_argc;
extern char **fg_runc_argv;

/* The index of runc's subcommand in argv, past the global options (those that take a value skip it); -1. */
int find_command(int argc, char **argv);
/* The value of argv[i] when it is opt (the value next) or opt=value; NULL otherwise. */
const char *option_value(int argc, char **argv, int i, const char *opt);
/* One `fakegpu-container-runtime: ...` line on stderr, and to runc's --log in its --log-format. */
void report_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* execv the low-level runtime with the whole line (returns only when that fails). */
void exec_runc(const char *low, const char *name);

#endif
