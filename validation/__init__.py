"""ddpsim validation: harness that measures real DDP runs, and the data it produced."""
