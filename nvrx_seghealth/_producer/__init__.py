"""What runs on a service node: ``publish-drained``'s engine, its Slurm queries, host
lists, debounce and state file.

Never imports torch nor the launcher (checked by ``./dev lint``, see ARCHITECTURE.md).
"""
