// Keeps dt_kernels non-empty while no kernel exists yet.
