"""Rules from experience: the reflector, what it reflects on, rule operations, the rule editor,
and rules mined from the bank's statistics."""

from crl._lazy import lazy_exports

_EXPORTS = {
    "Reflector": "crl.memory.reflection.reflector",
    "ReflectionReport": "crl.memory.reflection.reflector",
    "ReflectionLog": "crl.memory.reflection.reflector",
    "ReflectorConfig": "crl.memory.reflection.config",
    "ReflectionInput": "crl.memory.reflection.inputs",
    "select_inputs": "crl.memory.reflection.inputs",
    "RuleOp": "crl.memory.reflection.rule_ops",
    "parse_operations": "crl.memory.reflection.rule_ops",
    "RuleEditor": "crl.memory.reflection.rule_editor",
    "EditResult": "crl.memory.reflection.rule_editor",
    "MiningConfig": "crl.memory.reflection.config",
    "MinedCandidate": "crl.memory.reflection.mining_stats",
    "MiningReport": "crl.memory.reflection.mined_rules",
    "mine_rules": "crl.memory.reflection.mined_rules",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
