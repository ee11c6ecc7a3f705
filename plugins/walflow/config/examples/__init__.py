"""An example connector file, shipped as package data: ``walflow example-connector`` prints it."""
