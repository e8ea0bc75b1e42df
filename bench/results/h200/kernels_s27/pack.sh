#!/bin/bash
# End of a session-27 device call: few files come back from $OUT (8 at most), so pack the folders and the logs.
cd "$OUT" && for d in kernels* e2e_*; do [ -d "$d" ] && tar czf "$d.tgz" "$d" && rm -rf "$d"; done
ls | grep -v '\.tgz$' | grep -v '^picks.json$' | tar czf logs.tgz -T - --remove-files 2>/dev/null; ls -la "$OUT"
