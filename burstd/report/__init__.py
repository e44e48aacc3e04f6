"""Reports for admins: spend over time (PNG / self-contained HTML)."""
