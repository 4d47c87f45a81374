"""SmolLM2-135M-Instruct, the offline chat model: its weights, engines and generator."""
