"""Pure domain types. Nothing in this package performs I/O."""
