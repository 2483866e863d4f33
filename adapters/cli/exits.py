"""The `planfence` command's exit statuses (its console script reads them before anything else
is imported)."""

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
