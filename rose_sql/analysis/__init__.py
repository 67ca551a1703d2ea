"""Everything that reads finished runs: typed loading, agreement with experts, replay under other
policies, the comparison of systems, the HTML report, the audit export, judge cards, and the import of
the ROSE authors' outputs. Nothing here re-runs a pipeline stage."""
