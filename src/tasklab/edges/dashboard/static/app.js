<!-- placeholder until the dashboard lands -->
