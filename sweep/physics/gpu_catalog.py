"""The roofline GPUs' datasheet figures, one row each, from which ``hardware`` builds its catalog.

Units as ``hardware.GPU`` has them: memory in GiB (HBM parts: the marketed figure, GiB-class;
GDDR parts: what nvidia-smi reports, ECC's share taken); peak memory bandwidth in TB/s; dense
(no structured sparsity) tensor peaks in TFLOP/s at 16, 8 and 4 bits, a chip with no faster
4-bit path repeating its 8-bit figure; the per-GPU, per-direction GB/s of the link tensor
parallelism all-reduces over (NVLink or xGMI within a node, else the card's PCIe x16 slot);
and a default $ per GPU-hour, which configs override. A datasheet that quotes peaks "with
sparsity" only is halved to its dense figure.
"""
from __future__ import annotations

from typing import NamedTuple


class Sheet(NamedTuple):
    name: str
    memory_gib: float
    bandwidth_tbs: float
    tflops_16bit: float  # dense BF16/FP16 tensor peak
    tflops_8bit: float  # dense FP8 (INT8 where the chip has no FP8) tensor peak
    tflops_4bit: float  # dense FP4/INT4 peak where the chip has it, else the 8-bit figure
    interconnect_gbs: float
    link: str  # "nvlink" (NVLink or xGMI) or "pcie": which all-reduce latency prior it takes
    price_per_gpu_hour: float
    generation: str  # the architecture, for transferring another GPU's fitted factors
    source: str


SHEETS = (
    Sheet("H100-SXM", 80, 3.35, 989.4, 1978.9, 1978.9, 450, "nvlink", 2.0, "Hopper",
          "NVIDIA H100 Tensor Core GPU datasheet (SXM5): 3.35 TB/s HBM3, BF16 989 TF, "
          "FP8 1979 TF dense; NVLink 4 900 GB/s bidirectional; no INT4 tensor cores; "
          "$2/GPU-h per the 'Serve a Model' document"),
    Sheet("H200", 141, 4.8, 989.4, 1978.9, 1978.9, 450, "nvlink", 3.0, "Hopper",
          "NVIDIA H200 datasheet (SXM): 141 GB HBM3e, 4.8 TB/s, same compute as H100; "
          "price an assumed cloud on-demand rate"),
    Sheet("A100-80GB", 80, 2.039, 312.0, 624.0, 1248.0, 300, "nvlink", 1.5, "Ampere",
          "NVIDIA A100 datasheet (80GB SXM): 2,039 GB/s HBM2e, BF16 312 TF, INT8 624 TOPS, "
          "INT4 1248 TOPS dense; NVLink 3 600 GB/s bidirectional; price assumed"),
    Sheet("L40S", 46068 / 1024, 0.864, 362.05, 733.0, 733.0, 32, "pcie", 1.0, "Ada",
          "NVIDIA L40S datasheet: 48 GB GDDR6, 864 GB/s, BF16 362 TF, FP8 733 TF dense; "
          "PCIe Gen4 x16 64 GB/s bidirectional; nvidia-smi reports 46,068 MiB (ECC on, "
          "its default: github.com/akash-network/provider-configs pull 99); price assumed"),
    Sheet("B200", 180, 8.0, 2250.0, 4500.0, 9000.0, 900, "nvlink", 5.0, "Blackwell",
          "NVIDIA HGX B200 datasheet: 180 GB HBM3e, 8 TB/s, BF16 2.25 PF, FP8 4.5 PF, "
          "FP4 9 PF dense; NVLink 5 1.8 TB/s bidirectional; price assumed"),
    Sheet("MI300X", 192, 5.3, 1307.4, 2614.9, 2614.9, 448, "nvlink", 2.5, "CDNA3",
          "AMD Instinct MI300X datasheet: 192 GB HBM3, 5.3 TB/s, FP16 1307 TF, FP8 2615 TF "
          "dense; 7 Infinity Fabric links, 896 GB/s aggregate; no INT4 peak; price assumed"),
    Sheet("B300", 288, 8.0, 2250.0, 4500.0, 13125.0, 900, "nvlink", 6.0, "Blackwell",
          "NVIDIA HGX B300 datasheet (8 Blackwell Ultra GPUs): 288 GB HBM3e and 8 TB/s per "
          "GPU; per 8 GPUs BF16 36 PF, FP8 72 PF (sparse: 2.25 and 4.5 PF dense per GPU), "
          "FP4 144 PF sparse, 105 PF dense (13.1 PF per GPU); NVLink 5 1.8 TB/s "
          "bidirectional; price assumed"),
    Sheet("GB200", 186, 8.0, 2500.0, 5000.0, 10000.0, 900, "nvlink", 6.0, "Blackwell",
          "NVIDIA GB200 NVL72 specifications, one of its 72 GPUs: 13.4 TB HBM3e (186 GB "
          "per GPU) at 576 TB/s (8 TB/s); FP4 1,440 PF, FP8 720 PF, BF16 360 PF with "
          "sparsity per rack (10, 5 and 2.5 PF dense per GPU); NVLink 5 1.8 TB/s "
          "bidirectional per GPU; price assumed"),
    Sheet("MI325X", 256, 6.0, 1307.4, 2614.9, 2614.9, 448, "nvlink", 3.0, "CDNA3",
          "AMD Instinct MI325X datasheet: 256 GB HBM3E, 6 TB/s, FP16 1307.4 TF, FP8 "
          "2614.9 TF dense (MI300X's compute); 7 Infinity Fabric links, 896 GB/s "
          "aggregate; no 4-bit peak; price assumed"),
    Sheet("MI355X", 288, 8.0, 2516.6, 5033.2, 10066.3, 538, "nvlink", 4.0, "CDNA4",
          "AMD Instinct MI355X datasheet: 288 GB HBM3E, 8 TB/s, FP16 2.5 PF, FP8 5.0 PF, "
          "MXFP4 10.1 PF dense; 7 Infinity Fabric links of 153.6 GB/s (1,075 GB/s "
          "aggregate); price assumed"),
    Sheet("A100-40GB", 40, 1.555, 312.0, 624.0, 1248.0, 300, "nvlink", 1.48, "Ampere",
          "NVIDIA A100 datasheet (40GB SXM4, the HGX board's form): 40 GB HBM2, 1,555 GB/s, "
          "BF16 312 TF, INT8 624 TOPS, INT4 1248 TOPS dense; NVLink 3 600 GB/s "
          "bidirectional; $1.48/GPU-h Lambda on-demand list, May 2026 (techbytes.app "
          "serverless GPU pricing matrix)"),
    Sheet("H100-PCIe", 80, 2.0, 756.5, 1513.0, 1513.0, 64, "pcie", 2.86, "Hopper",
          "NVIDIA H100 Tensor Core GPU datasheet (PCIe): 80 GB HBM2e, 2 TB/s, BF16 1,513 TF "
          "and FP8 3,026 TF with sparsity; no INT4 tensor cores; PCIe Gen5 x16 128 GB/s "
          "bidirectional (no NVLink bridge); $2.86/GPU-h Lambda on-demand list, May 2026 "
          "(techbytes.app serverless GPU pricing matrix)"),
    Sheet("H20", 96, 4.0, 148.0, 296.0, 296.0, 450, "nvlink", 1.2, "Hopper",
          "NVIDIA HGX H20 specifications (SemiAnalysis, 'Nvidia's New China AI Chips', Nov "
          "2023): 96 GB HBM3, 4.0 TB/s, BF16 148 TF, FP8 296 TF dense; NVLink 4 900 GB/s "
          "bidirectional; no INT4 tensor cores; price assumed"),
    Sheet("L4", 23034 / 1024, 0.3, 121.0, 242.5, 242.5, 32, "pcie", 0.80, "Ada",
          "NVIDIA L4 datasheet: 24 GB GDDR6, 300 GB/s, BF16 242 TF and FP8 485 TF with "
          "sparsity; PCIe Gen4 x16 64 GB/s bidirectional; nvidia-smi reports 23,034 MiB "
          "(ECC on; e.g. GCP g2-standard-4); $0.80/GPU-h Modal's list, May 2026 "
          "(techbytes.app serverless GPU pricing matrix)"),
    Sheet("GH200", 96, 4.0, 989.4, 1978.9, 1978.9, 450, "nvlink", 1.49, "Hopper",
          "NVIDIA GH200 Grace Hopper Superchip datasheet (96 GB HBM3 version): 4 TB/s, "
          "BF16 1,979 TF and FP8 3,958 TF with sparsity (the H100 SXM's GPU); NVLink 4 "
          "900 GB/s bidirectional between superchips; its Grace LPDDR5X not counted; "
          "$1.49/GPU-h Lambda on-demand list (1x GH200 96 GB)"),
    Sheet("RTX-PRO-6000", 97887 / 1024, 1.597, 500.0, 1000.0, 2000.0, 64, "pcie", 1.57,
          "Blackwell",
          "NVIDIA RTX PRO 6000 Blackwell Server Edition datasheet: 96 GB GDDR7 (ECC), "
          "1,597 GB/s; 4,000 AI TOPS (FP4 with sparsity: 2 PF dense; 5th-generation tensor "
          "cores halve it at FP8 and again at 16 bits, accumulating in FP32 at full rate on "
          "RTX PRO parts); PCIe Gen5 x16 128 GB/s bidirectional; nvidia-smi reports 97,887 "
          "MiB (Hugging Face dataset uclanecl/NECL_GPUs); $1.57/GPU-h RunPod on-demand, "
          "March 2026 (deploybase.ai RunPod GPU pricing guide)"),
    Sheet("RTX-PRO-4500", 32623 / 1024, 0.896, 219.7, 439.5, 879.0, 64, "pcie", 0.6,
          "Blackwell",
          "NVIDIA RTX PRO 4500 Blackwell (workstation card, 200 W): 32 GB GDDR7 (ECC), "
          "896 GB/s; 82 SMs at 2,617 MHz boost: FP4 879 TF, FP8 439.5 TF, 16-bit 219.7 TF "
          "dense (TechPowerUp GPU database); PCIe Gen5 x16 128 GB/s bidirectional; "
          "nvidia-smi reports 32,623 MiB (a RunPod pod); price assumed"),
    Sheet("RTX-4090", 24564 / 1024, 1.008, 165.2, 330.3, 330.3, 32, "pcie", 0.60, "Ada",
          "NVIDIA Ada Lovelace architecture whitepaper, appendix (GeForce RTX 4090): 24 GB "
          "GDDR6X, 1,008 GB/s, BF16 165.2 TF and FP8 330.3 TF dense with FP32 accumulate "
          "(GeForce's half rate); PCIe Gen4 x16 64 GB/s bidirectional, no NVLink or peer "
          "access; nvidia-smi reports 24,564 MiB; $0.60/GPU-h RunPod on-demand, March 2026 "
          "(deploybase.ai RunPod GPU pricing guide)"),
    Sheet("GB300", 288, 8.0, 2500.0, 5000.0, 15000.0, 900, "nvlink", 7.0, "Blackwell",
          "NVIDIA GB300 NVL72 specifications, one of its 72 Blackwell Ultra GPUs: 288 GB "
          "HBM3e (20 TB a rack) at 576 TB/s a rack (8 TB/s); FP4 1,440 PF with sparsity, "
          "1,080 PF dense, FP8 720 PF and BF16 360 PF with sparsity per rack (15, 5 and "
          "2.5 PF dense per GPU); NVLink 5 1.8 TB/s bidirectional per GPU; price assumed"),
)


#: Each GPU's link to its host's memory, GB/s per direction, for a CPU KV tier's loads: the
#: PCIe generation of its x16 slot (Gen4 32 GB/s, Gen5 64 GB/s, Gen6 128 GB/s per direction,
#: PCI-SIG base specifications) or NVLink-C2C, and the datasheet that states it.
HOST_LINKS: dict[str, tuple[float, str]] = {
    "H100-SXM": (64.0, "PCIe Gen5 x16 (NVIDIA H100 datasheet, SXM5: PCIe Gen5 128 GB/s)"),
    "H200": (64.0, "PCIe Gen5 x16 (NVIDIA H200 datasheet: PCIe Gen5 128 GB/s)"),
    "A100-80GB": (32.0, "PCIe Gen4 x16 (NVIDIA A100 datasheet: PCIe Gen4 64 GB/s)"),
    "L40S": (32.0, "PCIe Gen4 x16 (NVIDIA L40S datasheet: 64 GB/s bidirectional)"),
    "B200": (64.0, "PCIe Gen5 x16 (NVIDIA HGX B200 datasheet: PCIe Gen5 host interface)"),
    "MI300X": (64.0, "PCIe Gen5 x16 (AMD Instinct MI300X datasheet: PCIe Gen5 x16, 128 GB/s)"),
    "B300": (128.0, "PCIe Gen6 x16 (NVIDIA HGX B300: ConnectX-8 SuperNIC's PCIe Gen6 switch)"),
    "GB200": (225.0, "NVLink-C2C, 900 GB/s bidirectional from one Grace CPU to two Blackwell "
                     "GPUs (NVIDIA GB200 NVL72 specifications): 225 GB/s per GPU per direction"),
    "MI325X": (64.0, "PCIe Gen5 x16 (AMD Instinct MI325X datasheet)"),
    "MI355X": (64.0, "PCIe Gen5 x16 (AMD Instinct MI355X datasheet)"),
    "A100-40GB": (32.0, "PCIe Gen4 x16 (NVIDIA A100 datasheet: PCIe Gen4 64 GB/s)"),
    "H100-PCIe": (64.0, "PCIe Gen5 x16 (NVIDIA H100 PCIe datasheet: 128 GB/s bidirectional)"),
    "H20": (64.0, "PCIe Gen5 x16 (NVIDIA HGX H20 specifications: PCIe Gen5 128 GB/s)"),
    "L4": (32.0, "PCIe Gen4 x16 (NVIDIA L4 datasheet: 64 GB/s bidirectional)"),
    "GH200": (450.0, "NVLink-C2C, 900 GB/s bidirectional CPU-GPU (NVIDIA GH200 datasheet)"),
    "RTX-PRO-6000": (64.0, "PCIe Gen5 x16 (NVIDIA RTX PRO 6000 Blackwell Server Edition "
                           "datasheet: 128 GB/s bidirectional)"),
    "RTX-PRO-4500": (64.0, "PCIe Gen5 x16 (NVIDIA RTX PRO 4500 Blackwell: 128 GB/s "
                           "bidirectional)"),
    "RTX-4090": (32.0, "PCIe Gen4 x16 (NVIDIA Ada Lovelace architecture whitepaper: 64 GB/s "
                       "bidirectional)"),
    "GB300": (225.0, "NVLink-C2C, 900 GB/s bidirectional from one Grace CPU to two Blackwell "
                     "Ultra GPUs (NVIDIA GB300 NVL72 specifications): 225 GB/s per GPU per "
                     "direction"),
}


#: Each GPU's own link to other nodes, Gb/s per direction (a pipeline stage's activations to the
#: next stage on another node), and the GPUs of one node, whose links inside it are
#: ``interconnect_gbs``: the scale-out network of the systems each datasheet names, one NIC per
#: GPU on HGX-class nodes.
INTERNODE: dict[str, tuple[float, int, str]] = {
    "H100-SXM": (400.0, 8, "NVIDIA DGX H100 datasheet: 8 single-port ConnectX-7 400 Gb/s "
                           "InfiniBand/Ethernet, one per GPU"),
    "H200": (400.0, 8, "NVIDIA DGX H200 datasheet: 8 single-port ConnectX-7 400 Gb/s, one per "
                       "GPU"),
    "A100-80GB": (200.0, 8, "NVIDIA DGX A100 datasheet: 8 single-port ConnectX-6 200 Gb/s HDR "
                            "InfiniBand, one per GPU"),
    "L40S": (200.0, 8, "NVIDIA Enterprise Reference Architecture 2-8-5-200 (PCIe GPU servers): "
                       "200 Gb/s east-west per GPU"),
    "B200": (400.0, 8, "NVIDIA DGX B200 datasheet: 8 single-port ConnectX-7 400 Gb/s, one per "
                       "GPU"),
    "MI300X": (400.0, 8, "Microsoft Azure ND MI300X v5: 8 x 400 Gb/s InfiniBand per VM, one "
                         "per GPU"),
    "B300": (800.0, 8, "NVIDIA DGX B300 datasheet: 8 ConnectX-8 SuperNICs, 800 Gb/s each, one "
                       "per GPU"),
    "GB200": (400.0, 72, "NVIDIA DGX GB200 datasheet: 72 single-port ConnectX-7 400 Gb/s per "
                         "rack, one per GPU; its 72 GPUs are one NVLink domain"),
    "MI325X": (400.0, 8, "AMD Instinct MI325X platform: 8 GPUs, one 400 Gb/s NIC each (AMD "
                         "Pensando Pollara 400)"),
    "MI355X": (400.0, 8, "AMD Instinct MI355X platform: 8 GPUs, one 400 Gb/s NIC each (AMD "
                         "Pensando Pollara 400)"),
    "A100-40GB": (200.0, 8, "NVIDIA DGX A100 datasheet: 8 single-port ConnectX-6 200 Gb/s HDR "
                            "InfiniBand, one per GPU"),
    "H100-PCIe": (200.0, 8, "NVIDIA Enterprise Reference Architecture 2-8-5-200 (PCIe GPU "
                            "servers): 200 Gb/s east-west per GPU"),
    "H20": (400.0, 8, "HGX H20: the HGX H100 board's design, one 400 Gb/s ConnectX-7 per GPU"),
    "L4": (12.5, 8, "Google Cloud G2 (g2-standard-96, 8 x L4): 100 Gb/s per VM with Tier_1 "
                    "networking, 12.5 Gb/s per GPU"),
    "GH200": (400.0, 32, "NVIDIA GH200 NVL32: 32 superchips in one NVLink domain (the "
                         "catalog's link between superchips), one ConnectX-7 400 Gb/s each"),
    "RTX-PRO-6000": (200.0, 8, "NVIDIA Enterprise Reference Architecture 2-8-5-200 (RTX PRO "
                               "servers): 200 Gb/s east-west per GPU"),
    "RTX-PRO-4500": (25.0, 4, "assumed: a workstation of 4 cards sharing one 100 Gb/s "
                              "Ethernet port (25 Gb/s per GPU)"),
    "RTX-4090": (12.5, 8, "assumed: a server of 8 cards sharing one 100 Gb/s Ethernet port "
                          "(12.5 Gb/s per GPU)"),
    "GB300": (800.0, 72, "NVIDIA GB300 NVL72 specifications: 72 ConnectX-8 SuperNICs, 800 Gb/s "
                         "each, one per GPU; its 72 GPUs are one NVLink domain"),
}
