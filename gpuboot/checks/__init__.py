"""Node checks: pure rules over evidence (rules.py) and the testinfra module that
runs them over SSH for certify, scan and molecule's verifier (test_node.py)."""
