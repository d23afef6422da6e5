"""python -m qattn {doctor [--json] | version | --help}"""
import argparse
import json
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m qattn", description="qattn's Python package: checks of this machine, and the version.",
        epilog="doctor's exit codes: 0 ready for GPU use, 1 usable for compile-only work (no CUDA driver or "
               "device), 2 the library is missing or broken.")
    commands = parser.add_subparsers(dest="command", metavar="{doctor,version}")
    doctor = commands.add_parser("doctor", help="check the library, libnvrtc, the CUDA driver and GPUs, PyTorch "
                                                "and the cache; exit code 0, 1 or 2 (see below)")
    doctor.add_argument("--json", action="store_true", help="print the report as one JSON object")
    commands.add_parser("version", help="print the package's and the library's versions")
    args = parser.parse_args(argv)
    if args.command == "doctor":
        from . import doctor as checks
        report = checks.run_checks()
        print(json.dumps(report, indent=2) if args.json else checks.format_report(report))
        return report["exit_code"]
    if args.command == "version":
        from . import __version__, version
        try:
            library = version()
        except OSError as e:
            print(f"qattn {__version__} (library not loaded: {str(e).splitlines()[0]})")
            return 2
        print(f"qattn {__version__} (library {library})")
        return 0
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
