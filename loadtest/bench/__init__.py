"""`ocr-bench <scenario>`: the project's benchmarks behind one command (`loadtest.bench.cli`).

The harness: `scenario` (a scenario's name, help, arguments and run method, and the registry),
`options` (the options scenarios share), `common` (the loops they share: page sets, a server's
levels counted in correct pages, the engine limit), `header` (the report header: machine, CPU,
OpenVINO, commit, load) and `results` (JSON, Markdown and plots). Every other module holds one
scenario (`ocr-bench --help` lists them); `make bench` runs `choice`.
"""
