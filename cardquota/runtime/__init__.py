"""What the processes share below the webhooks and the controllers: the cluster cache the events feed, health
routes, the process-wide metrics and the serving certificate. Imports the core and kube, never operator/ or
webhooks/ (which do not import each other either: cardquota/processes.py puts them together)."""
