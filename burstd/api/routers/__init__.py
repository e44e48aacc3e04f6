"""The control API's routes."""
