"""What a person sees: the console tables, the live view, the HTML report."""
