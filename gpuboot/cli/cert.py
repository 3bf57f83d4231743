"""`gpuboot cert keygen|verify`: the signing key pair, and whether a certificate is valid
for a node. (`certify --gen-key/--verify` are the old spellings of these.)"""

from __future__ import annotations

from gpuboot.cli import options
from gpuboot.cli.outcome import Outcome
from gpuboot.errors import EXIT_NODE_FAILED, EXIT_OK, BadInput


def register(verbs, common) -> None:
    cert = verbs.add_parser(
        "cert",
        help="certificate keys and checks: keygen, verify",
        epilog="exit codes: 0 done (verify: valid), 1 the certificate is not valid, 2 bad input",
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
        parents=[common, options.verify(), options.allow_partial()],
        help="check a certificate (signature, expiry, host, scope) for the node --host names",
    )
    verify.add_argument("certificate", metavar="CERT", help="the certificate (JSON)")
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
    result = certificate.verify(
        cert_path,
        args.pubkey,
        host=args.host,
        bundle=args.bundle,
        allow_partial=args.allow_partial,
    )
    cert = result.certificate or {}
    doc = {
        "certificate": cert_path,
        "host": args.host,
        "ok": result.ok,
        "reason": result.reason,
        "scope": cert.get("scope"),
        "probes": cert.get("probes"),
        "expires_at": cert.get("expires_at"),
    }
    text = f"{cert_path}: {'valid' if result.ok else 'INVALID'}: {result.reason}"
    return Outcome(EXIT_OK if result.ok else EXIT_NODE_FAILED, doc, text)
