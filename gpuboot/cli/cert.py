"""`gpuboot cert keygen|verify`: the signing key pair, and whether a certificate is valid
for a node. (`certify --gen-key/--verify` are the old spellings of these.)"""

from __future__ import annotations

from gpuboot.cli import options
from gpuboot.cli.outcome import EXIT_PARTIAL, Outcome
from gpuboot.errors import EXIT_NODE_FAILED, EXIT_OK, BadInput


def register(verbs, common) -> None:
    cert = verbs.add_parser(
        "cert",
        help="certificate keys and checks: keygen, verify",
        epilog="exit codes: 0 done (verify: valid), 1 the certificate is not valid, 2 bad input, "
        f"{EXIT_PARTIAL} verify: authentic and valid but partial, with a gap the node's "
        "gpuboot_accept_partial does not accept",
    )
    actions = cert.add_subparsers(
        dest="cert_action", required=True, metavar="{keygen,verify}", parser_class=type(cert)
    )
    keygen = actions.add_parser(
        "keygen", parents=[common], help="create an Ed25519 signing key pair (PATH, PATH.pub)"
    )
    keygen.add_argument("path", metavar="PATH", help="the private key file to create")
    keygen.set_defaults(func=run_keygen)
    verify = actions.add_parser(
        "verify",
        parents=[common, options.verify(), options.retired_allow_partial()],
        help="check a certificate (signature, expiry, host, scope) for the node --host names",
    )
    verify.add_argument("certificate", metavar="CERT", help="the certificate (JSON)")
    verify.add_argument(
        "-i",
        "--inventory",
        help="the inventory whose gpuboot_accept_partial for --host says which gaps of a "
        "partial certificate are accepted (without it: none)",
    )
    verify.set_defaults(func=run_verify)


def run_keygen(args) -> Outcome:
    return keygen(args.path)


def run_verify(args) -> Outcome:
    return verify(args.certificate, args, label="cert verify")


def keygen(path: str) -> Outcome:
    from gpuboot.report import certificate

    made = certificate.generate_key(path)
    return Outcome(
        EXIT_OK,
        {"private_key": str(made), "public_key": f"{made}.pub"},
        f"signing key: {made} (keep it private); public key: {made}.pub",
    )


def verify(cert_path: str, args, *, label: str) -> Outcome:
    """Is this certificate valid for the node named by --host (and, with --bundle, for the
    hardware a later collection of it shows)?"""
    from gpuboot.report import certificate

    if not args.pubkey:
        raise BadInput(f"{label} needs --pubkey", hint="pass the signer's KEY.pub")
    if not args.host:
        raise BadInput(
            f"{label} needs --host NAME: a certificate is valid for one node only",
            where=label,
            hint="name the node the certificate is presented for (its inventory name)",
        )
    accepts = _policy(args, label)
    result = certificate.verify(
        cert_path, args.pubkey, host=args.host, bundle=args.bundle, accepts=accepts
    )
    cert = result.certificate or {}
    doc = {
        "certificate": cert_path,
        "host": args.host,
        "ok": result.ok,
        "reason": result.reason,
        "scope": cert.get("scope"),
        "probes": cert.get("probes"),
        "gaps": cert.get("missing") if cert else None,
        "accept_partial": list(accepts),
        "measured": cert.get("measured"),
        "expires_at": cert.get("expires_at"),
    }
    word = "valid" if result.ok else "PARTIAL" if result.refused_partial else "INVALID"
    text = f"{cert_path}: {word}: {result.reason}"
    if measured := cert.get("measured"):
        from gpuboot.cli.extent_text import measured_text

        text += f"\n  measured: {measured_text(measured)}"
    code = EXIT_OK if result.ok else EXIT_PARTIAL if result.refused_partial else EXIT_NODE_FAILED
    return Outcome(code, doc, text)


def _policy(args, label: str) -> tuple[str, ...]:
    """The gap scopes --host's gpuboot_accept_partial accepts, from -i (none without it)."""
    path = getattr(args, "inventory", None)
    if not path:
        return ()
    from gpuboot.inventory import load_inventory
    from gpuboot.report.extent import policy

    inv = load_inventory(path)
    if args.host not in inv.hosts:
        raise BadInput(
            f"host {args.host!r} is not in the inventory",
            where=f"{label} -i {path}",
            hint="pass the node's inventory name with --host, or the inventory that holds it",
        )
    return policy(inv.hosts[args.host])
