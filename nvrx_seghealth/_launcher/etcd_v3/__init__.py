"""etcd-v3 rendezvous: backend, store and client over etcd's v3 API.

The room imports nothing of the check.
"""
