"""What an operator runs by hand from a shell: the ``walflow`` command (:mod:`~walflow.admin.cli`: ``status``,
``reset``, ``sql``, ``example-connector``, ``dag-files``) and starting a connector over
(:mod:`~walflow.admin.reset`)."""
