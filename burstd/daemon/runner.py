"""Moved to ``burstd.testbed.daemon_process`` (the daemon-process harness is the bed's, not the cycle's); this
re-export keeps parallel work importing the old path running until the merge removes it."""

from burstd.testbed.daemon_process import PKG_ROOT, DaemonProcess, config_with

__all__ = ["PKG_ROOT", "DaemonProcess", "config_with"]
