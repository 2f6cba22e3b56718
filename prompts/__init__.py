"""Every string the model sees: Jinja templates (`templates/`), the prompt state that both the
live loop and prompt replay advance (`state`), and token-budgeted prompt assembly."""
