"""The project's commands and their layers: the runner (run_all, jobs, results), the report, the reader, the set-up and
the GPU machine's check. Run each as `python -m scripts.<name>` from the repository root (docs/contributing.md)."""
