"""The `replay` commands: `main` parses the arguments; one module per command (run, verify, diff, advise,
generate, hash) and the helpers they share (progress, failures)."""
