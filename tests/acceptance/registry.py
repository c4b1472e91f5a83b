"""The crates the acceptance suites crawl from their loopback mirror.

The names read as crates.io's do, so the suites read naturally; the rest is written here (version
lists chosen by hand, dependencies, yanks) and turned into index lines and API answers by
`stagecrawl.demo.registry.build_mirror` (checksums, licenses, dates generated). Nothing is
copied from crates.io or from ../shared/fixtures.
"""

from __future__ import annotations

from stagecrawl.demo.registry import Crates

# name -> (versions oldest first, dependencies of the newest versions, yanked versions)
CRATES: Crates = {
    "cfg-if": (["0.1.0", "0.1.10", "1.0.0"], [], set()),
    "libc": (["0.2.100", "0.2.150", "0.2.155"], [], {"0.2.150"}),
    "cc": (["1.0.79", "1.0.83", "1.1.0"], ["libc"], set()),
    "log": (["0.4.17", "0.4.20", "0.4.22"], ["cfg-if"], set()),
    "memchr": (["2.5.0", "2.6.0", "2.7.4"], [], set()),
    "itoa": (["1.0.9", "1.0.11"], [], set()),
    "ryu": (["1.0.15", "1.0.18"], [], set()),
    "proc-macro2": (["1.0.66", "1.0.86"], [], set()),
    "quote": (["1.0.33", "1.0.36"], ["proc-macro2"], set()),
    "syn": (["1.0.109", "2.0.38", "2.0.72"], ["proc-macro2", "quote"], set()),
    "serde_derive": (["1.0.188", "1.0.204"], ["syn", "quote", "proc-macro2"], set()),
    "serde": (["1.0.188", "1.0.190", "1.0.204"], ["serde_derive"], {"1.0.190"}),
    "serde_json": (["1.0.107", "1.0.120"], ["serde", "itoa", "ryu"], set()),
    "aho-corasick": (["1.0.5", "1.1.3"], ["memchr"], set()),
    "regex-syntax": (["0.7.5", "0.8.4"], [], set()),
    "regex": (["1.9.5", "1.10.5"], ["aho-corasick", "memchr", "regex-syntax"], set()),
    "bitflags": (["1.3.2", "2.4.0", "2.6.0"], [], set()),
    "once_cell": (["1.18.0", "1.19.0"], [], set()),
    "bytes": (["1.4.0", "1.6.1"], [], set()),
    "getrandom": (["0.2.10", "0.2.15"], ["cfg-if", "libc"], set()),
    "rand_core": (["0.6.4"], ["getrandom"], set()),
    "rand": (["0.8.5"], ["rand_core", "libc"], set()),
    "smallvec": (["0.6.9", "0.6.14", "1.6.0", "1.6.1", "1.13.2"], [], {"0.6.9"}),
    "tar": (["0.4.15", "0.4.36", "0.4.44", "0.4.45"], ["libc"], set()),
    "time": (["0.1.45", "0.2.22", "0.3.5", "0.3.36"], ["libc", "itoa"], set()),
    "chrono": (["0.4.19", "0.4.38"], ["time"], set()),
    "hyper": (["0.12.35", "0.14.9", "0.14.30", "1.4.1"], ["bytes", "log"], set()),
    "openssl": (["0.10.38", "0.10.55", "0.10.66"], ["bitflags", "cfg-if", "libc"], set()),
    "image": (["0.23.14", "0.25.2"], ["bytemuck"], set()),
    "bytemuck": (["1.14.0", "1.16.1"], [], set()),
    "tokio": (["1.32.0", "1.39.2"], ["bytes", "memchr", "libc"], set()),
}

# A made-up application's resolved dependencies at two release tags (for stagecrawl.demo's
# make_app_repo), among the crates above.
APP_PINS = {
    "v1.0.0": {
        "serde": "1.0.188",
        "serde_derive": "1.0.188",
        "syn": "2.0.38",
        "quote": "1.0.33",
        "proc-macro2": "1.0.66",
        "hyper": "0.14.9",
        "bytes": "1.4.0",
        "log": "0.4.17",
        "cfg-if": "1.0.0",
        "smallvec": "1.6.0",
        "tar": "0.4.36",
        "libc": "0.2.100",
    },
    "v1.1.0": {
        "serde": "1.0.204",
        "serde_derive": "1.0.204",
        "syn": "2.0.72",
        "quote": "1.0.36",
        "proc-macro2": "1.0.86",
        "hyper": "0.14.30",
        "bytes": "1.6.1",
        "log": "0.4.22",
        "cfg-if": "1.0.0",
        "smallvec": "1.13.2",
        "tar": "0.4.45",
        "libc": "0.2.155",
        "openssl": "0.10.55",
        "bitflags": "2.6.0",
    },
}
