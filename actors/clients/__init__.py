"""Producer and consumer clients (the data plane arrives with issue 4)."""
