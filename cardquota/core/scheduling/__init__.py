"""The scheduler's rules from the design documents, as pure functions: capacity-card (card quotas at enqueue and
allocation, node order), crossquota (CPU pods on GPU nodes), mGPU (shared cards per container) and the DRA queue
quota. The extender service, ``cardquota simulate`` and the controllers' events all call these same functions."""
