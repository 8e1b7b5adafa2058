"""checkov custom checks for orderflow's Bicep templates (loaded with ``--external-checks-dir``)."""
