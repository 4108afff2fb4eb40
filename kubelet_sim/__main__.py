from kubelet_sim.cli import main

main()
