# One line per suite (keeps merges simple).
