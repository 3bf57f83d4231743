"""The evidence bundle: the on-disk contract every verb shares, read and written here only.

``<bundle>/<host>/<probe-file>`` (each the unmodified stdout of one command, named after it:
:mod:`.names`), ``<bundle>/<host>/meta.json`` (:mod:`.meta`) and ``<bundle>/MANIFEST.json``
(:mod:`.manifest`). A bundle may have left the controller's hands, so every read stays
within the caps and refuses links and special files (:mod:`.store`); a host's own SKU
profile is untrusted YAML (:mod:`.profile`). The types are in :mod:`.model`.

A package of small modules rather than one file: together they are ~550 lines, and most
readers need only the names and the types (the rules) or only the reading (the gate), not
the YAML of a profile nor the component table meta.json's allow-list is built from.
"""
