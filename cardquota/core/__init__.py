"""The pure core of cardquota.

Nothing in this package performs I/O or imports Kubernetes clients, Kopf or aiohttp (an import-linter contract
enforces it). Every adapter — the CLI, the webhooks, the controllers — calls these functions, so they cannot
disagree about what a card type, a quota or a queue's usage is.
"""
