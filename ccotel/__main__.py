from ccotel.cli import main

if __name__ == "__main__":  # multiprocessing (spawn) imports this module in its workers
    raise SystemExit(main())
