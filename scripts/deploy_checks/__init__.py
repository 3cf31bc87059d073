"""Checks behind scripts/validate-deploy.py, one module per kind of deploy file."""
