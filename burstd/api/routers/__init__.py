"""The control API's routes, one module per audience (the routes' tags, which ``auth`` reads as the level each
needs): ``hooks`` (Slurm's programs, and the public health check), ``agent`` (burstd-agent on a cloud node),
``read`` (status, leases, spend, metrics), ``admin`` (pause, drain, budgets, gc), ``progress`` (training jobs).
Each module's ``register(app, ctx)`` adds its routes to the app (see ``burstd.api.app`` for why not an APIRouter)."""
