"""The thin CLI: each verb is a short typer function in its own module calling the library."""
