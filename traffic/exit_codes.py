"""Exit codes of the rank processes, shared with the launcher that reads them (no torch import)."""

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_WRONG = 3  # the run finished, but some collective's result was wrong
