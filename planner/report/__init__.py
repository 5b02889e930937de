"""Human output: tables (rich) and figures (matplotlib, PNG)."""
