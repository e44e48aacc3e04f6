"""The local provider: "VMs" that are network namespaces running a real slurmd (see provider.py, netns.py)."""
