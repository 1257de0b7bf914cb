from costspec.cli import main

main()
