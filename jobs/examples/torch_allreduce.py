"""A torchrun-style script: init_process_group from the environment, one
all-reduce, each rank printing its device. Runs unchanged under torchrun or
`cohort run jobs/examples/torchrun.toml`."""
import os

import torch
import torch.distributed as dist


def main():
    use_cuda = torch.cuda.is_available()
    local_rank = int(os.environ["LOCAL_RANK"])
    if use_cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    x = torch.full((1024,), float(rank + 1), device=device)
    dist.all_reduce(x)
    expected = world * (world + 1) / 2
    name = torch.cuda.get_device_name(device) if use_cuda else "cpu"
    uuid = str(torch.cuda.get_device_properties(device).uuid) if use_cuda else "-"
    print(f"rank {rank}/{world} local_rank {local_rank} device {device} ({name}, uuid {uuid}) "
          f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')} "
          f"all_reduce sum {x[0].item():.0f} expected {expected:.0f} "
          f"{'OK' if x[0].item() == expected else 'WRONG'}", flush=True)
    dist.destroy_process_group()
    if x[0].item() != expected:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
