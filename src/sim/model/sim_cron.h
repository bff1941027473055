/* The one cron parser of the simulator (cron.c), shared by KFP's
 * recurring runs (6 fields, robfig/cron with seconds) and the batch/v1
 * CronJob controller (the standard 5 fields). UTC. */
#ifndef KB_SIM_CRON_H
#define KB_SIM_CRON_H

/* Next time strictly after `after` (unix seconds) matching the cron
 * expression, or INFINITY; -1 for a malformed expression. */
double kb_sim_cron_next(const char *expr, double after);
int kb_sim_cron_valid(const char *expr);
/* Fields in the expression: 5, 6, or 0 for a descriptor (@hourly). */
int kb_sim_cron_fields(const char *expr);

#endif
