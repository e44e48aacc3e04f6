"""burstd-agent: runs on each cloud node, turns the cloud's preemption notice into a clean checkpoint.

See docs/agent.md. Entry point: ``burstd.agent.main:main``.
"""
