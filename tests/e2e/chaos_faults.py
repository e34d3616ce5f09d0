"""The chaos soak's nemesis (chaos.py): every fault by name. Each is an f_<name> method of one family:
chaos_faults_nodes.py (node_loss, zone_loss, drain, eviction_storm, priority_burst), chaos_faults_process.py
(webhook_kill, leader_kill, apiserver_restart), chaos_faults_config.py (policy_edit, policy_invalid,
policy_recreate, upgrade/downgrade, hpa_min); the schedule is chaos_nemesis.NemesisCore's.
"""

from __future__ import annotations

from chaos_faults_config import ConfigFaults
from chaos_faults_nodes import NodeFaults
from chaos_faults_process import ProcessFaults

FAULTS = ("drain", "node_loss", "zone_loss", "webhook_kill", "leader_kill", "apiserver_restart", "policy_edit",
          "policy_invalid", "policy_recreate", "upgrade", "hpa_min", "priority_burst", "eviction_storm")
# `upgrade` in --faults stands for both directions: each such fault goes to the other release of the
# product it picks, and is named `upgrade` (1.20 -> 1.23) or `downgrade` (1.23 -> 1.20) in the history.
FAULT_ALIASES = {"downgrade": "upgrade"}


class Nemesis(NodeFaults, ProcessFaults, ConfigFaults):
    """A fault every U(10, 40) s, each one of `faults` (FAULTS) at random; see NemesisCore."""
