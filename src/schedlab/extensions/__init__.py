"""Paper A's future work, built: speech-active (VAD) job sizes, per-language kappa on a
multilingual mix, and dynamic FCFS/SJF/HRRN switching under a drifting workload. Each module
holds one study; the mechanisms live where they belong (estimate, workload, policies)."""
